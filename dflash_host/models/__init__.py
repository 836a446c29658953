"""Models on the host: the one locator and config.json reader (config), safetensors headers, the drafter's
shape, target facts and DFlash choices, and the Hugging Face Hub fetch into a real HF cache (hub_*)."""
