"""The file boundary: spec files (TOML, JSON) and Hugging Face config.json in, TOML out.
Outside the pure core on purpose: these modules read files."""
