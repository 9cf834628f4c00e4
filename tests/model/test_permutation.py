"""XLNet's factorization order: who may see whom, checked on the masks and through the model itself."""
import pytest
import torch

from bertkit.model.permutation import PAPER_K, permutation_targets
from bertkit.model.xlnet import XLNetConfig, XLNetModel


def predictable_rows():
    predictable = torch.ones(3, 20, dtype=torch.bool)
    predictable[:, -2:] = False               # <sep> <cls>
    predictable[1, :6] = False                # left padding
    predictable[2, :] = False
    predictable[2, 3] = True                  # a row with one predictable token
    return predictable


def test_each_target_sees_context_and_earlier_targets_never_itself():
    predictable = predictable_rows()
    out = permutation_targets(predictable, k=PAPER_K, rng=torch.Generator().manual_seed(0))
    for row in range(3):
        rank = out.rank[row]
        targets = (rank >= 0).nonzero().squeeze(-1)
        n = int(predictable[row].sum())
        assert len(targets) == max(1, round(n / PAPER_K))                  # the last ~1/K of the order
        assert bool(predictable[row][targets].all())                        # never padding or special tokens
        visible = out.perm_mask[row] == 0                                   # (T_query, T_key)
        for i in range(20):
            if rank[i] >= 0:
                expected = (rank < 0) | ((rank >= 0) & (rank < rank[i]))
                assert not visible[i, i]                                    # query stream: not itself
            else:
                expected = rank < 0                                         # context sees no target
            assert torch.equal(visible[i], expected), (row, i)
        # target_mapping: one-hot rows at the targets, in factorization order; unused rows empty
        positions = out.target_positions[row]
        used = positions >= 0
        assert torch.equal(positions[used], targets[rank[targets].argsort()])
        assert torch.equal(out.target_mapping[row][used].argmax(-1), positions[used])
        assert out.target_mapping[row][used].sum(-1).eq(1).all() and out.target_mapping[row][~used].eq(0).all()


def test_targets_are_spread_over_positions_at_rate_one_in_k():
    predictable = torch.ones(1, 42, dtype=torch.bool)
    rng = torch.Generator().manual_seed(1)
    counts = torch.zeros(42)
    for _ in range(600):
        counts += (permutation_targets(predictable, k=7, rng=rng).rank[0] >= 0).float()
    assert counts.sum() == 600 * 6                                          # 42 / 7 per draw
    rate = counts / 600                                                     # 1/7 ~ 0.143 at every position
    assert rate.min() > 0.08 and rate.max() < 0.21


def test_no_information_leaks_through_the_query_stream():
    """Changing a target's own token, or a later target's, leaves its query-stream output; an earlier one changes it."""
    torch.manual_seed(0)
    model = XLNetModel(XLNetConfig(vocab_size=40, hidden_size=32, num_layers=2, num_heads=4,
                                   intermediate_size=48)).eval()
    ids = torch.randint(10, 40, (1, 14))
    out = permutation_targets(torch.ones(1, 14, dtype=torch.bool), k=2, rng=torch.Generator().manual_seed(2))
    rank, positions = out.rank[0], out.target_positions[0]

    def query_stream(tokens):
        with torch.no_grad():
            return model(tokens, perm_mask=out.perm_mask, target_mapping=out.target_mapping).query_hidden_state[0]

    base = query_stream(ids)
    for p, position in enumerate(positions.tolist()):
        for other in positions.tolist():
            changed = ids.clone()
            changed[0, other] = 10 + (changed[0, other] - 9) % 30
            moved = (query_stream(changed)[p] - base[p]).abs().max()
            if rank[other] >= rank[position]:
                assert moved == 0, (position, other)
            else:
                assert moved > 1e-4, (position, other)
        context = int((rank < 0).nonzero()[0])
        changed = ids.clone()
        changed[0, context] = 10 + (changed[0, context] - 9) % 30
        assert (query_stream(changed)[p] - base[p]).abs().max() > 1e-4


def test_k_must_leave_context():
    with pytest.raises(ValueError, match="k must be > 1"):
        permutation_targets(torch.ones(1, 5, dtype=torch.bool), k=1)
