"""Request logs and their replay: what a server recorded (`aisim serve --record`) or a trace holds,
replayed on the simulation or against a live endpoint, with the drift between them and a fit of the
cost model's constants (`aisim replay`, `aisim calibrate`).

- `records`: the log in memory; `formats`: reading and writing the log formats; `recorder`: the
  background writer a server uses;
- `simulate`: replay on a scenario in virtual time; `live`: replay against an endpoint in real time;
- `drift`: the drift report; `plot`: recorded against replayed latency over time;
- `fitting`, `calibrate`: the search of the cost-model constants; `commands`: the CLI's two commands.
"""
