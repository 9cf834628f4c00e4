"""Causal language modelling: the GPT-2-style model, sampling and the decoding loop."""
from bertkit.generate.generation import Generation, TextStream, generate
from bertkit.model.causal_lm import CausalLM, CausalLMOutput, causal_lm_loss, gpt_config
from bertkit.generate.sampling import GREEDY, SamplingConfig, filter_logits, next_token

__all__ = ["CausalLM", "CausalLMOutput", "GREEDY", "Generation", "SamplingConfig", "TextStream", "causal_lm_loss",
           "filter_logits", "generate", "gpt_config", "next_token"]
