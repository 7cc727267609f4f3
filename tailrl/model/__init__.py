"""Native Llama-family decoder (Llama, Qwen2, Qwen3, Mistral) and its Hugging Face loading."""

from tailrl.model.args import ARCHITECTURES, ModelArgs
from tailrl.model.attention import AttnMetadata
from tailrl.model.decoder import CausalLM
from tailrl.model.loading import build_model, load, load_tokenizer, save_hf
from tailrl.model.weights import hf_state_dict, init_random, load_weights

__all__ = ["ARCHITECTURES", "AttnMetadata", "CausalLM", "ModelArgs", "build_model", "hf_state_dict", "init_random",
           "load", "load_tokenizer", "load_weights", "save_hf"]
