import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.finetune.prompt.pet import Pattern, PETClassifier, Verbalizer, pet_loss
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead
from bertkit.tokenizer import Tokenizer

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "it", "was", "great", "terrible", "good", "bad", "movie",
         "film", "very", "not", ".", "a", "##s"]


@pytest.fixture
def tokenizer():
    return Tokenizer.from_vocab({w: i for i, w in enumerate(WORDS)}, lowercase=True)


def _classifier(tokenizer, template="{text} It was [MASK].", max_length=32):
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=len(WORDS), hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                           max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0)
    return PETClassifier(Encoder(config), MaskedLMHead(config), tokenizer, Pattern.parse(template),
                         Verbalizer.parse("pos=great,neg=terrible", tokenizer), max_length=max_length)


def test_pattern_places_mask_and_cuts_only_the_text(tokenizer):
    ids = Pattern.parse("{text} It was [MASK].").encode(tokenizer, ["a very good film", "movie"], max_length=8)
    t = tokenizer.token_to_id
    assert ids[0] == [t("[CLS]"), t("a"), t("very"), t("it"), t("was"), t("[MASK]"), t("."), t("[SEP]")]
    assert ids[1] == [t("[CLS]"), t("movie"), t("it"), t("was"), t("[MASK]"), t("."), t("[SEP]")]
    with pytest.raises(BertkitError, match="MASK"):
        Pattern.parse("{text} was great")
    with pytest.raises(BertkitError, match="one known token"):
        Verbalizer.parse("pos=greatest,neg=bad", tokenizer)
    with pytest.raises(BertkitError, match="label=word"):
        Verbalizer.parse("pos:great,neg=bad", tokenizer)


def test_scores_are_the_mlm_logits_of_the_label_words(tokenizer):
    model = _classifier(tokenizer).eval()
    batch = model.encode(["a good film", "a bad movie ."])
    logits = model(**batch)
    hidden = model.encoder(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    mask_at = batch["input_ids"] == tokenizer.mask_id
    full = model.mlm(hidden[mask_at], model.encoder.embeddings.token.weight)
    torch.testing.assert_close(logits, full[:, [tokenizer.token_to_id("great"), tokenizer.token_to_id("terrible")]])
    assert model.predict(["a good film"])[0] in ("pos", "neg")


def test_few_shot_training_fits_the_examples(tokenizer):
    model = _classifier(tokenizer)
    texts = ["a good film", "very good movie", "a bad film", "very bad movie"]
    labels = ["pos", "pos", "neg", "neg"]
    batch = {**model.encode(texts), "labels": torch.tensor([model.verbalizer.labels.index(l) for l in labels])}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(25):
        loss, metrics = pet_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert model.predict(texts) == labels


def test_p_tuning_trains_only_the_prompt_when_frozen(tokenizer_with_unused):
    from bertkit.finetune.prompt.ptuning import PTuningClassifier

    tok = tokenizer_with_unused
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                           intermediate_size=64, max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0)
    encoder, head = Encoder(config), MaskedLMHead(config)
    frozen = {k: v.clone() for k, v in encoder.state_dict().items()}
    model = PTuningClassifier(encoder, head, tok, Pattern.parse("{text} [P] [P] [MASK]."),
                              Verbalizer.parse("pos=great,neg=terrible", tok))
    batch = model.encode(["a good film", "a bad film"])
    assert batch["input_ids"][0, 4:6].tolist() == [tok.token_to_id("[unused0]"), tok.token_to_id("[unused1]")]
    batch["labels"] = torch.tensor([0, 1])
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["prompt"]
    before = pet_loss(model, batch)[0].item()
    for _ in range(15):
        loss, _ = pet_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < before
    assert all(torch.equal(v, frozen[k]) for k, v in encoder.state_dict().items())


@pytest.fixture
def tokenizer_with_unused():
    return Tokenizer.from_vocab({w: i for i, w in enumerate(WORDS + ["[unused0]", "[unused1]"])}, lowercase=True)
