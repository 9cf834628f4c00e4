"""The no-repeat n-gram ban and the repetition penalty (bertkit.generate.repetition) against transformers'
NoRepeatNGramLogitsProcessor / RepetitionPenaltyLogitsProcessor, and the decoding loops that use them."""
import pytest
import torch
from transformers import NoRepeatNGramLogitsProcessor, RepetitionPenaltyLogitsProcessor

from bertkit.errors import BertkitError
from bertkit.finetune.seq2seq.unilm import Seq2SeqLM, seq2seq_decode, seq2seq_sample
from bertkit.generate import GREEDY, RepetitionConfig, SamplingConfig, control_repetition, generate
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead

CLS, SEP, PAD = 2, 3, 0


def _hf(scores, histories, size, penalty):
    """transformers' processors in the order its generate() applies them (penalty first)."""
    ids = torch.tensor(histories, dtype=torch.long)
    if penalty != 1.0:
        scores = RepetitionPenaltyLogitsProcessor(penalty)(ids, scores.clone())
    if size > 0:
        scores = NoRepeatNGramLogitsProcessor(size)(ids, scores.clone())
    return scores


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("penalty", [1.0, 0.7, 1.2, 3.0])
def test_equals_transformers_processors_on_random_logits_and_histories(size, penalty):
    rng = torch.Generator().manual_seed(size * 10 + int(penalty * 10))
    for length in (0, 1, 2, 5, 12):
        for alphabet in (3, 40):           # a small alphabet makes repeated n-grams common
            scores = torch.randn(6, 40, generator=rng) * 3                        # (B, V), both signs
            histories = torch.randint(0, alphabet, (6, length), generator=rng).tolist()
            histories[0] = ([0, 1, 2, 3] * 3)[:length]                            # a planted loop
            expected = _hf(scores, histories, size, penalty)
            original = scores.clone()
            ours = control_repetition(scores, histories, RepetitionConfig(size, penalty))
            assert torch.equal(ours, expected), (length, alphabet)
            assert torch.equal(scores, original)                                  # the input is left as it was
            if size > 0 and length == 12:
                assert torch.isinf(ours).any()                                    # the ban did something here


def test_rows_keep_their_own_histories_of_different_lengths():
    scores = torch.randn(3, 20, generator=torch.Generator().manual_seed(1))
    histories = [[1, 2, 1], [5, 6, 7, 5, 6], []]
    ours = control_repetition(scores, histories, RepetitionConfig(2, 1.5))
    for row, history in enumerate(histories):
        expected = _hf(scores[row:row + 1], [history], 2, 1.5) if history else scores[row:row + 1]
        assert torch.equal(ours[row:row + 1], expected)


@pytest.mark.parametrize("size, penalty", [(-1, 1.0), (0, 0.0), (0, -1.2), (0, float("nan")), (0, float("inf")),
                                           (1.5, 1.0), (True, 1.0)])
def test_bad_settings_are_refused(size, penalty):
    with pytest.raises(BertkitError, match="no_repeat_ngram_size|repetition_penalty"):
        RepetitionConfig(size, penalty)


def _random_seq2seq(seed: int = 0) -> Seq2SeqLM:
    torch.manual_seed(seed)
    config = EncoderConfig(vocab_size=40, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                           max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0)
    encoder = Encoder(config)
    head = MaskedLMHead(config)
    head.apply(encoder._init_weights)
    return Seq2SeqLM(encoder, head).eval()


def _greedy_with_hf(model: Seq2SeqLM, source, steps, banned, size, penalty):
    """Greedy decoding that recomputes everything each step and lets transformers' processors pick."""
    target = []
    full = [CLS, *source, SEP]
    for _ in range(steps):
        ids = torch.tensor([full + target])
        types = torch.tensor([[0] * len(full) + [1] * len(target)])
        with torch.no_grad():
            logits = model(ids, types, torch.ones_like(ids))                      # (1, V)
        logits[:, banned] = float("-inf")
        token = int(_hf(logits, [target], size, penalty).argmax())
        if token == SEP:
            break
        target.append(token)
    return target


@pytest.mark.parametrize("size, penalty", [(2, 1.0), (0, 1.3), (3, 2.0)])
def test_seq2seq_greedy_and_top_k_1_sampling_follow_the_transformers_reference(size, penalty):
    for seed in range(2):
        model = _random_seq2seq(seed)
        for source in ([5, 6, 7], [9, 30, 31, 12]):
            expected = _greedy_with_hf(model, source, 16, [PAD], size, penalty)
            for use_cache in (True, False):
                assert expected == seq2seq_decode(model, source, CLS, SEP, 16, banned_ids=[PAD], use_cache=use_cache,
                                                  no_repeat_ngram_size=size, repetition_penalty=penalty)
            sampled = seq2seq_sample(model, source, CLS, SEP, 2, SamplingConfig(top_k=1), 16, [PAD],
                                     repetition=RepetitionConfig(size, penalty))
            assert sampled == [expected, expected]


def test_the_controls_change_what_a_looping_model_decodes():
    """A near-uniform random model loops when decoding greedily: the controls must break the loop (a test that the
    parity above is not vacuous on this model), and sampling with no-repeat 2 never repeats a bigram."""
    model = _random_seq2seq(0)
    plain = seq2seq_decode(model, [5, 6, 7], CLS, SEP, 24, banned_ids=[PAD, SEP])
    bigrams = list(zip(plain, plain[1:]))
    assert len(set(bigrams)) < len(bigrams)
    assert plain != seq2seq_decode(model, [5, 6, 7], CLS, SEP, 24, banned_ids=[PAD, SEP], repetition_penalty=2.0)
    generator = torch.Generator().manual_seed(0)
    for sample in seq2seq_sample(model, [5, 6, 7], CLS, SEP, 8, SamplingConfig(temperature=0.5), 24, [PAD, SEP],
                                 generator, RepetitionConfig(no_repeat_ngram_size=2)):
        bigrams = list(zip(sample, sample[1:]))
        assert len(sample) == 24 and len(set(bigrams)) == len(bigrams)


@pytest.mark.parametrize("size, penalty", [(2, 1.0), (1, 1.0), (0, 1.5), (3, 1.2)])
def test_beam_search_with_the_controls_equals_recomputation(size, penalty):
    model = _random_seq2seq(1)
    options = dict(max_new_tokens=12, banned_ids=[PAD], num_beams=3, no_repeat_ngram_size=size,
                   repetition_penalty=penalty)
    cached = seq2seq_decode(model, [9, 30, 31, 12], CLS, SEP, **options)
    assert cached == seq2seq_decode(model, [9, 30, 31, 12], CLS, SEP, use_cache=False, **options)
    if size:
        grams = [tuple(cached[i:i + size]) for i in range(len(cached) - size + 1)]
        assert len(set(grams)) == len(grams)


def test_causal_generation_counts_the_prompt_as_transformers_does(tiny_model):
    """GPT-2 style: the history is the prompt and the new tokens (HF's input_ids for a decoder-only model)."""
    prompt = [5, 9, 5, 17]
    ids = list(prompt)
    for _ in range(10):                                  # reference: recompute, HF processors on the raw logits
        with torch.no_grad():
            logits = tiny_model(torch.tensor([ids])).logits[:, -1]
        ids.append(int(_hf(logits, [ids], 2, 1.4).argmax()))
    out = generate(tiny_model, prompt, 10, GREEDY, no_repeat_ngram_size=2, repetition_penalty=1.4)
    assert out.token_ids == ids[len(prompt):]
    assert out.token_ids != generate(tiny_model, prompt, 10, GREEDY).token_ids
    sampled = generate(tiny_model, prompt, 10, SamplingConfig(top_k=1), no_repeat_ngram_size=2,
                       repetition_penalty=1.4)
    assert sampled.token_ids == out.token_ids
