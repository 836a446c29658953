"""What a model's config.json says that more than one module needs to know."""

from __future__ import annotations


def is_multimodal_target(config: dict) -> bool:
    """True when a target's config.json is a multimodal checkpoint (text fields under text_config).

    vllm-service passes --language-model-only for such targets; drafter-config reads their text fields.
    """
    return isinstance(config.get("text_config"), dict) or isinstance(config.get("vision_config"), dict)
