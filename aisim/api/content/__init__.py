"""What a simulated model answers: the text of each content kind (`text`), the answer planned for a request
(`generation`: its tokens, pieces, tool calls, log-probabilities), JSON values for a schema (`schema_values`,
`patterns`) and the tokenizers that count and split (`tokenizer`, `hf_tokenizer`). No HTTP here."""
