import pytest
import torch

from bertkit.checkpoints import save_checkpoint
from bertkit.generate import CausalLM, gpt_config
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead
from bertkit.tokenizer import Tokenizer
from bertkit.tokenizer.bpe import train_bpe

TEXT = ["the cat sat on the mat.", "the dog sat on the log.", "a cat and a dog met on a mat.",
        "naïve café owners sell crème brûlée — 東京 too."] * 5


@pytest.fixture
def tiny_config():
    return gpt_config(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64)


@pytest.fixture
def tiny_model(tiny_config):
    torch.manual_seed(0)
    return CausalLM(tiny_config).eval()


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def bpe(corpus_file):
    return train_bpe([corpus_file], vocab_size=300, min_frequency=1)


MLM_WORDS = ("it was great terrible good bad movie film the a very not thou art thee you are hath has "
             "said god light let there be and").split()


@pytest.fixture
def make_mlm_folder(tmp_path):
    """make_mlm_folder(name, with_mlm=True) -> a tiny random BERT folder (with an MLM head unless told not to)
    whose vocabulary holds [unused0], [unused1] for P-tuning."""
    def make(name: str = "mlm", with_mlm: bool = True):
        torch.manual_seed(0)
        tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]", ".", ",", *MLM_WORDS]
        tokenizer = Tokenizer.from_vocab({t: i for i, t in enumerate(tokens)}, lowercase=True)
        config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                               intermediate_size=64, max_position_embeddings=64, hidden_dropout=0.0,
                               attention_dropout=0.0)
        encoder = Encoder(config)
        heads = {}
        if with_mlm:
            heads["mlm"] = MaskedLMHead(config)
            heads["mlm"].apply(encoder._init_weights)
        return save_checkpoint(tmp_path / name, encoder, tokenizer, heads)
    return make
