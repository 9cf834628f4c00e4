import torch

from bertkit.generate.unilm import Seq2SeqLM, seq2seq_decode, seq2seq_inputs, seq2seq_loss, unilm_mask
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead

CLS, SEP, PAD = 2, 3, 0


def _tiny():
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=40, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                           max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0)
    return Seq2SeqLM(Encoder(config), MaskedLMHead(config))


def test_mask_shapes_what_each_token_sees():
    attention = torch.tensor([[1, 1, 1, 1, 0]])
    types = torch.tensor([[0, 0, 1, 1, 1]])
    assert unilm_mask("bidirectional", attention)[0, 0].tolist()[0] == [True, True, True, True, False]
    assert unilm_mask("left-to-right", attention)[0, 0, 1].tolist() == [True, True, False, False, False]
    seq2seq = unilm_mask("seq2seq", attention, types)[0, 0]
    assert seq2seq[0].tolist() == [True, True, False, False, False]     # source: source only, both ways
    assert seq2seq[2].tolist() == [True, True, True, False, False]      # target: source + its own prefix
    assert seq2seq[3].tolist() == [True, True, True, True, False]


def test_seq2seq_source_ignores_the_target_and_target_ignores_the_future():
    model = _tiny().eval()
    batch = seq2seq_inputs([[5, 6, 7]], [[8, 9, 10]], CLS, SEP, PAD, 32)
    assert batch["input_ids"].tolist() == [[CLS, 5, 6, 7, SEP, 8, 9, 10, SEP]]
    changed = {**batch, "input_ids": batch["input_ids"].clone()}
    changed["input_ids"][0, 7] = 11
    hidden = lambda b: model.encoder(b["input_ids"], token_type_ids=b["token_type_ids"], attention_bias=unilm_mask(
        "seq2seq", b["attention_mask"], b["token_type_ids"])).last_hidden_state
    torch.testing.assert_close(hidden(changed)[0, :7], hidden(batch)[0, :7])
    assert not torch.allclose(hidden(changed)[0, 7], hidden(batch)[0, 7])


def test_learns_to_reverse_and_decodes():
    model = _tiny()
    pairs = [([5 + i, 10 + i, 20 + i], [20 + i, 10 + i, 5 + i]) for i in range(2)]
    batch = seq2seq_inputs([p[0] for p in pairs], [p[1] for p in pairs], CLS, SEP, PAD, 32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(50):
        loss, metrics = seq2seq_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert metrics["tokens"] == 2 * 4 and loss.item() < 0.1
    assert seq2seq_decode(model, pairs[1][0], CLS, SEP, max_new_tokens=6) == pairs[1][1]
    assert seq2seq_decode(model, pairs[1][0], CLS, SEP, max_new_tokens=6, use_cache=False) == pairs[1][1]


def test_cached_seq2seq_decoding_equals_recomputation():
    model = _tiny()
    for source in ([5, 6, 7], [9, 30, 31, 12]):
        cached = seq2seq_decode(model, source, CLS, SEP, max_new_tokens=8, banned_ids=[SEP, PAD])
        assert cached == seq2seq_decode(model, source, CLS, SEP, max_new_tokens=8, banned_ids=[SEP, PAD],
                                        use_cache=False)
        assert len(cached) == 8
