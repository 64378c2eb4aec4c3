"""End-to-end pipelines that chain the engine's stages (simulate → build → partition → train → evaluate)."""
