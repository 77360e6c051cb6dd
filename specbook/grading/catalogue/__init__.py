"""Implementations the checker is judged by: correct ones that must pass, broken ones that must fail.

Three kinds: CORRECT_* (the modified rejection sampler: lossless and standard),
LOSSLESS_* (lossless but not the standard algorithm: lossless=True, standard=False)
and BROKEN_* (lossy: lossless=False, and so standard=False).  ENGINE_BUGS are lossy too:
verifier bugs that shipped in serving engines, each with its public source, where it lived
(the drafter or the verifier) and words its hint must carry.

Shape legend: K draft length, V vocab.

The correct implementations use randomness in different ways (inverse CDF,
``torch.multinomial``, Gumbel-max, an unnormalised residual, uniforms drawn up
front), so passing cannot depend on reproducing the reference's exact draws.
The broken ones are bugs students and real implementations make; each must fail
with probability >= 0.99 (see ``python -m specbook.grading --detection-table``).
They are written the way a student would write them, one position at a time.

This module is the catalogue itself: six tables of :class:`Entry` (name, description, the
function, the checks a bug must fail) and ``ENGINE_BUGS``, of :class:`EngineBug`.  The code
lives beside it: the token rules (one position) in ``token_rules.py``, the chain verifiers in
``verifiers.py``, the engines' bugs in ``engine_bugs.py``, the two draws all use in ``common.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ... import _lazy_submodules
from ...naive import accept_if_target_prefers, accept_p_then_p, resample_from_p
from ...verify import verify_token
from .engine_bugs import (cumulative_block_verifier, draft_token_only_residual_verifier, greedy_assistant_rule,
                          processed_draft_raw_q_verifier, same_token_or_ratio_verifier, unsynced_ranks_verifier)
from .token_rules import (bug_accept_p_residual, bug_always_accept, bug_epsilon_normaliser, bug_exclude_draft,
                          bug_global_seed, bug_greedy_residual, bug_ratio_swapped, bug_resample_q, bug_residual_abs,
                          bug_residual_swapped, bug_reuse_uniform, rule_draft_certain, rule_gumbel, rule_ignore_draft,
                          rule_inverse_cdf, rule_multinomial, rule_unnormalised)
from .verifiers import (vbug_bonus_row, vbug_cumulative_ratio, vbug_global_seed, vbug_greedy_bonus,
                        vbug_naive_per_position, vbug_no_stop, vbug_off_by_one, vbug_padded, vbug_resample_p,
                        vbug_residual_next_row, vbug_residual_q0, vbug_shared_uniform, verifier_block, verifier_draft_certain,
                        verifier_gumbel, verifier_loop, verifier_no_bonus, verifier_reference, verifier_upfront)

__all__ = [
    "Entry",
    "CORRECT_TOKEN_RULES", "LOSSLESS_TOKEN_RULES", "BROKEN_TOKEN_RULES",
    "CORRECT_VERIFIERS", "LOSSLESS_VERIFIERS", "BROKEN_VERIFIERS",
    "EngineBug", "ENGINE_BUGS",
]


@dataclass(frozen=True)
class Entry:
    """name, one-line description, the function, and (for bugs) words of the check names that should fail."""

    name: str
    description: str
    fn: Callable
    expect: tuple[str, ...] = ()


# =========================================================================== token rules


CORRECT_TOKEN_RULES = (
    Entry("reference (specbook.verify.verify_token)", "the library's rule", verify_token),
    Entry("inverse CDF", "u * q(x) < p(x); residual by searchsorted on its CDF", rule_inverse_cdf),
    Entry("multinomial", "u < p(x)/q(x); normalised residual to torch.multinomial", rule_multinomial),
    Entry("Gumbel-max", "1 - u <= p/q; residual by argmax(log r + Gumbel noise)", rule_gumbel),
    Entry("unnormalised residual", "unnormalised max(0, p - q) to torch.multinomial; returns a tensor",
          rule_unnormalised),
)


BROKEN_TOKEN_RULES = (
    Entry("naive: accept w.p. p(x), else sample p", "ignores q; rejection draws from p", accept_p_then_p,
          ('acceptance',)),
    Entry("naive: resample from p", "right acceptance, rejection draws from p", resample_from_p,
          ('residual',)),
    Entry("naive: accept iff p(x) >= q(x)", "deterministic acceptance", accept_if_target_prefers,
          ('acceptance',)),
    Entry("ratio swapped", "accepts with min(1, q/p)", bug_ratio_swapped,
          ('p = 0', 'acceptance')),
    Entry("residual swapped", "rejection draws from max(0, q - p)", bug_residual_swapped,
          ('p = 0', 'residual')),
    Entry("residual |p - q|", "abs instead of clamp at 0", bug_residual_abs,
          ('p = 0', 'residual')),
    Entry("resample p without the draft", "rejection draws from p with x removed", bug_exclude_draft,
          ('residual',)),
    Entry("uniform reused for the residual", "the acceptance uniform also picks the residual token", bug_reuse_uniform,
          ('residual',)),
    Entry("resample from q", "rejection draws a fresh draft", bug_resample_q,
          ('p = 0', 'residual')),
    Entry("always accept", "no verification at all", bug_always_accept,
          ('p = 0', 'acceptance')),
    Entry("greedy residual", "argmax of the residual instead of a sample", bug_greedy_residual,
          ('residual',)),
    Entry("accept w.p. p(x), residual", "acceptance ignores q; residual right", bug_accept_p_residual,
          ('acceptance',)),
    Entry("global seed in the rule", "torch.manual_seed(0) on every call", bug_global_seed,
          ('acceptance',)),
    Entry("epsilon in the normaliser", "r / (sum + 1e-6) then inverse CDF", bug_epsilon_normaliser,
          ('p = 0',)),
)


LOSSLESS_TOKEN_RULES = (
    Entry("draft treated as certain", "keep x w.p. p(x), else sample p without x", rule_draft_certain,
          ('acceptance',)),
    Entry("ignore the draft", "always samples p: lossless but never speculative", rule_ignore_draft,
          ('acceptance',)),
)


# =========================================================================== verifiers


CORRECT_VERIFIERS = (
    Entry("reference (specbook.verify.verify_chain)", "the library's batched verifier, one row", verifier_reference),
    Entry("loop + multinomial", "one position at a time", verifier_loop),
    Entry("uniforms up front + inverse CDF", "K+1 uniforms in one call; cumprod stop", verifier_upfront),
    Entry("Gumbel-max, bonus as residual vs q = 0", "1 - u <= p/q; last token by Gumbel-max", verifier_gumbel),
)


BROKEN_VERIFIERS = (
    Entry("not stopping at the first rejection", "skips rejected drafts and keeps going", vbug_no_stop,
          ('well-formed',)),
    Entry("one uniform shared across positions", "u drawn once per call", vbug_shared_uniform,
          ('number of accepted', 'acceptance')),
    Entry("bonus from the wrong row", "bonus sampled from target_probs[K-1]", vbug_bonus_row,
          ('bonus', 'well-formed')),
    Entry("draft/target off by one", "draft j judged by target_probs[j+1]", vbug_off_by_one,
          ('acceptance', 'well-formed')),
    Entry("resample from p", "rejection draws from p_j, not the residual", vbug_resample_p,
          ('corrected',)),
    Entry("residual with q_0 at every position", "max(0, p_j - q_0)", vbug_residual_q0,
          ('corrected',)),
    Entry("cumulative acceptance ratio", "draft j kept iff u_j < prod_{i<=j} min(1, p_i/q_i)", vbug_cumulative_ratio,
          ('number of accepted', 'acceptance')),
    Entry("greedy bonus", "argmax of target_probs[K] instead of a sample", vbug_greedy_bonus,
          ('bonus',)),
    Entry("corrected token from the next row", "residual of position j+1 after rejecting j", vbug_residual_next_row,
          ('corrected', 'well-formed')),
    Entry("naive rule per position", "accept w.p. p_j(x), else sample p_j", vbug_naive_per_position,
          ('acceptance', 'corrected')),
    Entry("global seed in the verifier", "torch.manual_seed on every call, global RNG", vbug_global_seed,
          ('acceptance',)),
    Entry("padded output", "returns the (K+1,) row with -1 padding", vbug_padded,
          ('well-formed',)),
)


LOSSLESS_VERIFIERS = (
    Entry("drafts treated as certain", "keep x_j w.p. p_j(x_j), else sample p_j without x_j (the one-hot "
          "n-gram rule on sampled drafts)", verifier_draft_certain,
          ('acceptance',)),
    Entry("no bonus token", "returns only the K drafts when all are accepted", verifier_no_bonus,
          ('number of accepted',)),
    Entry("block verification (specbook.verify_block.verify_block)", "Sun et al. 2025: keeps the longest prefix "
          "whose coin h_i came up, then the block residual; keeps more drafts than min(1, p/q) token by token",
          verifier_block, ('number of accepted', 'acceptance')),
)


# =========================================================================== bugs that shipped in engines


@dataclass(frozen=True)
class EngineBug(Entry):
    """A lossy :class:`Entry` that shipped in a serving engine.

    source: the public report (and fix); lives_in: "drafter" or "verifier"; checker: "check_token_rule"
    or "check_verifier"; hint: words the hint of its first failure must contain (what names the bug).
    """

    source: str = ""
    lives_in: str = ""
    checker: str = ""
    hint: str = ""


ENGINE_BUGS = (
    EngineBug("greedy assistant, softmax as q", "the drafter proposes argmax(q) but q is its softmax",
              greedy_assistant_rule, ('acceptance', 'emitted token ~ p'),
              source="transformers #32867 (fix: PR #33534)", lives_in="drafter", checker="check_token_rule",
              hint="does not depend on draft_token"),
    EngineBug("processed drafts, raw q", "drafts sampled after temperature and top-k, q from the raw logits",
              processed_draft_raw_q_verifier, ('first emitted token', 'acceptance'),
              source="transformers #47932 (fix: PR #47961)", lives_in="drafter", checker="check_verifier",
              hint="not draft_probs"),
    EngineBug("same token or ratio", "keep x if the target's own sample is x, or u * q(x) < p(x)",
              same_token_or_ratio_verifier, ('acceptance', 'number of accepted'),
              source="rtp-llm PR #1295", lives_in="verifier", checker="check_verifier",
              hint="counts a draft twice"),
    EngineBug("residual at the draft only", "after a rejection, max(0, p - q(x) e_x): p without the draft",
              draft_token_only_residual_verifier, ('corrected', 'first emitted token'),
              source="xLLM PR #2175", lives_in="verifier", checker="check_verifier",
              hint="at the drafted token only"),
    EngineBug("block verify from token-wise tests", "running product of clamped ratios >= running product of "
              "uniforms, longest such prefix, token-wise residual", cumulative_block_verifier,
              ('number of accepted', 'acceptance'),
              source="vllm-ascend #7807 (fix: PR #7808), PR #7839", lives_in="verifier", checker="check_verifier",
              hint="depends on the drafts after it"),
    EngineBug("ranks with their own uniforms", "one rank's count of accepted drafts, another rank's tokens",
              unsynced_ranks_verifier, ('well-formed', 'corrected'),
              source="vLLM #17498", lives_in="verifier", checker="check_verifier",
              hint="two different random draws"),
)

__getattr__, __dir__ = _lazy_submodules(globals())  # every submodule resolves on first use
