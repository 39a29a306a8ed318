// A fast client for bench/serve_streams.py: N concurrent SSE streams, a timestamp per content chunk. It uses
// node:http (a keep-alive agent, one socket per stream): Node's fetch (undici web streams) costs about twice
// the CPU per chunk (2.1 s against 1.1 s for 100,000 chunks) and its stalls showed up as 20 ms strays in the measured gaps.
// Usage: node bench/stream_client.mjs URL STREAMS TOKENS  -> prints JSON {"stamps": [[ms, ...], ...]}
import http from "node:http";

const [url, streams, tokens] = [new URL(process.argv[2]), Number(process.argv[3]), Number(process.argv[4])];
const body = JSON.stringify({model: "stream", messages: [{role: "user", content: "go"}], max_tokens: tokens,
                             ignore_eos: true, stream: true});
const agent = new http.Agent({keepAlive: true, maxSockets: streams});

function one() {
  return new Promise((resolve, reject) => {
    const stamps = [];
    let buffer = "";
    const request = http.request(url, {method: "POST", agent, headers: {"Content-Type": "application/json"}}, (response) => {
      response.setEncoding("utf8");
      response.on("data", (text) => {
        const now = performance.now();
        buffer += text;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          if (event.includes('"content":"') && !event.includes('"role"')) stamps.push(now);
        }
      });
      response.on("end", () => resolve(stamps));
      response.on("error", reject);
    });
    request.on("error", reject);
    request.end(body);
  });
}

const results = await Promise.all(Array.from({length: streams}, one));
process.stdout.write(JSON.stringify({stamps: results}));
