"""Console themes, one TOML file each (shipped in the wheel as console.themes)."""
