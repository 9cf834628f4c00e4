"""Causal language modelling: the GPT-2-style model, sampling and the decoding loop. Names load on first use
(bertkit/lazy.py), so the GPT job's config imports without torch."""
from bertkit.lazy import lazy_exports

_NAMES = {"Generation": "generation", "TextStream": "generation", "generate": "generation",
          "RepetitionConfig": "repetition", "control_repetition": "repetition", "ngram_banned_tokens": "repetition",
          "GREEDY": "sampling", "SamplingConfig": "sampling", "filter_logits": "sampling", "next_token": "sampling",
          **dict.fromkeys(["CausalLM", "CausalLMOutput", "causal_lm_loss", "gpt_config"], "bertkit.model.causal_lm")}
__all__ = sorted(_NAMES)
__getattr__ = lazy_exports(__name__, _NAMES)
