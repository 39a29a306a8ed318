// A fast client for bench/serve_streams.py: N concurrent SSE streams, a timestamp per content chunk.
// Usage: node bench/stream_client.mjs URL STREAMS TOKENS  -> prints JSON {"stamps": [[ms, ...], ...]}
const [url, streams, tokens] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const body = JSON.stringify({model: "stream", messages: [{role: "user", content: "go"}], max_tokens: tokens,
                             ignore_eos: true, stream: true});

async function one() {
  const stamps = [];
  const response = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"}, body});
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const bytes of response.body) {
    const now = performance.now();
    buffer += decoder.decode(bytes, {stream: true});
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (event.includes('"content":"') && !event.includes('"role"')) stamps.push(now);
    }
  }
  return stamps;
}

const results = await Promise.all(Array.from({length: streams}, one));
process.stdout.write(JSON.stringify({stamps: results}));
