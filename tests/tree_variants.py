"""A configurable tree verifier whose defaults equal specbook.verify_tree.verify_tree draw for draw.

Each keyword switches on one plausible bug in multi-candidate tree verification; the
statistical tests use them as *broken twins* that must be caught.
"""
from __future__ import annotations

import torch

from specbook.sampling import sample
from specbook.tree import depths, max_path_length
from specbook.verify import residual
from specbook.verify_tree import child_table


def tree_verifier(*, update_p=True, final_from="current", one_hot=False, bonus_from="leaf", shared_uniform=False):
    """update_p=False:      every sibling is judged against the node's original p (no residual
                            between siblings); the last token comes from the last sibling's residual.
    final_from="p":         siblings judged correctly, but after all fail the last token comes
                            from the node's original p instead of the running residual.
    one_hot=True:           sampled siblings treated as deterministic (draft_probs ignored).  NOT a
                            twin: exact for any candidates, only slower (see the tests).
    bonus_from="parent":    at a leaf, the bonus token is read from the leaf's parent's row.
    shared_uniform=True:    one uniform per depth, shared by the siblings tried there.
    """

    def verify(target_probs, draft_probs, draft_tokens, parents, generator=None):
        B, N1, V = target_probs.shape
        N = N1 - 1
        dtype = torch.float64 if target_probs.dtype == torch.float64 or (
            draft_probs is not None and draft_probs.dtype == torch.float64) else torch.float32
        p_all = target_probs.to(dtype)
        x_all = draft_tokens.long()
        kids = child_table(parents)
        D = max_path_length(parents)
        node_depth = depths(parents)
        plist = parents.tolist()
        rows = torch.arange(B)
        if shared_uniform:
            u = torch.rand((B, D), generator=generator, dtype=dtype)[:, node_depth]  # (B, N)
        else:
            u = torch.rand((B, N), generator=generator, dtype=dtype)
        slot = torch.zeros(B, dtype=torch.long)
        p = p_all[:, 0]
        p_node = p.clone()  # the node's original p
        last_q = None  # (B, V) q of the last rejected sibling at the current node (update_p=False)
        path = torch.full((B, D), -1, dtype=torch.long)
        n_acc = torch.zeros(B, dtype=torch.long)
        final = torch.zeros_like(p)
        done = torch.zeros(B, dtype=torch.bool)
        for depth in range(D + 1):
            chosen = torch.full((B,), -1, dtype=torch.long)
            rejected_any = torch.zeros(B, dtype=torch.bool)
            last_q = torch.zeros_like(p)
            for j in range(kids.shape[1]):
                child = kids[slot, j]
                live = ~done & (chosen < 0) & (child >= 0)
                if not live.any():
                    break
                c = child.clamp_min(0)
                x = x_all[rows, c]
                if draft_probs is None or one_hot:
                    q = torch.nn.functional.one_hot(x, V).to(dtype)
                else:
                    q = draft_probs.to(dtype)[rows, c]
                judge = p if update_p else p_node
                ok = live & (u[rows, c] * q.gather(1, x[:, None]).squeeze(1) < judge.gather(1, x[:, None]).squeeze(1))
                rejected = live & ~ok
                if update_p:
                    p = torch.where(rejected[:, None], residual(p, q), p)
                last_q = torch.where(rejected[:, None], q, last_q)
                rejected_any |= rejected
                chosen = torch.where(ok, child, chosen)
            advance = chosen >= 0
            stop = ~done & ~advance
            if final_from == "p":
                law = p_node
            elif update_p:
                law = p
            else:
                law = torch.where(rejected_any[:, None], residual(p_node, last_q), p_node)
            if bonus_from == "parent":
                at_leaf = kids[slot, 0] < 0 if kids.shape[1] else torch.ones(B, dtype=torch.bool)
                parent_slot = torch.tensor([0] + [par + 1 for par in plist])[slot]
                law = torch.where(at_leaf[:, None], p_all[rows, parent_slot], law)
            final = torch.where(stop[:, None], law, final)
            done = done | stop
            if depth < D:
                path[:, depth] = torch.where(advance, chosen, -1)
            n_acc = n_acc + advance.long()
            slot = torch.where(advance, chosen + 1, slot)
            p = torch.where(advance[:, None], p_all[rows, slot], p)
            p_node = torch.where(advance[:, None], p_all[rows, slot], p_node)
            if bool(done.all()):
                break
        last = sample(final, generator)
        kept = torch.where(path >= 0, x_all.gather(1, path.clamp_min(0)), -1)  # (B, D)
        tokens = torch.cat([kept, kept.new_full((B, 1), -1)], 1).scatter(1, n_acc[:, None], last[:, None])
        return tokens, n_acc + 1, path

    return verify


BROKEN_TWINS = {
    "no residual between siblings (original p reused)": dict(update_p=False),
    "all siblings rejected: last token from p, not the residual": dict(final_from="p"),
    "bonus token from the parent's row": dict(bonus_from="parent"),
    "one uniform shared by all siblings": dict(shared_uniform=True),
}
