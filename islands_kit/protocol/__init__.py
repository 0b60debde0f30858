"""The comparison protocol as part of the kit: studies written as data (``benchmarks/studies/*.toml``), one resumable
runner, a report made from the runs' result.json files, and the statistics every printed ratio carries."""
