"""Broken submissions to 08_write_the_loop: each must lose the points of the named cells, and only those."""

BY_THE_LIBRARY = '''from specbook.decode import speculative_generate


def speculative_decode(target, drafter, prompt, max_new_tokens, gamma=4, params=SamplingParams(), generator=None):
    result = speculative_generate(target, drafter, torch.tensor(prompt), max_new_tokens, params=params, gamma=gamma,
                                  generator=generator)
    return result.new_tokens[0].tolist()
'''

# The instructor's loop, written out once; each broken submission below changes one line of it.
LOOP = '''def speculative_decode(target, drafter, prompt, max_new_tokens, gamma=4, params=SamplingParams(), generator=None):
    target.reset(1)
    if len(prompt) > 1:
        target.forward(torch.tensor([prompt[:-1]]))
    out = []
    while len(out) < max_new_tokens:
        text = prompt + out
        k = min(gamma, max_new_tokens - len(out) - 1)
        draft = drafter.propose([torch.tensor(text)], k, params, generator)
        drafts = draft.tokens[0].tolist()
        before = int(target.cache_lengths[0])
        p = logits_to_probs(target.forward(torch.tensor([[text[-1]] + drafts]))[0], params)
        if draft.probs is None:
            q = torch.nn.functional.one_hot(torch.tensor(drafts, dtype=torch.long), p.shape[-1]).to(p.dtype)
        else:
            q = draft.probs[0].to(p.dtype)
        kept = 0
        while kept < len(drafts):
            x = drafts[kept]
            if not torch.rand((), generator=generator, dtype=p.dtype) * q[kept, x] < p[kept, x]:
                break
            kept += 1
        if kept < len(drafts):
            last = int(sample((p[kept] - q[kept]).clamp(min=0), generator))
        else:
            last = int(sample(p[len(drafts)], generator))
        target.rollback(torch.tensor([before + kept + 1]))
        out += drafts[:kept] + [last]
    return out[:max_new_tokens]
'''


def _broken(old: str, new: str) -> str:
    assert LOOP.count(old) == 1, old
    return LOOP.replace(old, new)


NO_ROLLBACK = _broken("        target.rollback(torch.tensor([before + kept + 1]))\n", "")
BONUS_FROM_THE_WRONG_ROW = _broken("last = int(sample(p[len(drafts)], generator))",
                                   "last = int(sample(p[len(drafts) - 1], generator))")
PAST_THE_BUDGET = _broken("k = min(gamma, max_new_tokens - len(out) - 1)", "k = gamma")

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    "by the library": ({"speculative_decode": BY_THE_LIBRARY}, ("greedy_equality", "sampling_law"),
                       ["write it yourself", "speculative_generate"]),
    "no rollback": ({"speculative_decode": NO_ROLLBACK}, ("properties", "greedy_equality", "sampling_law"),
                    ["Roll the cache back", "What went wrong", "rejected draft"]),
    "bonus from the wrong row": ({"speculative_decode": BONUS_FROM_THE_WRONG_ROW}, ("greedy_equality", "sampling_law"),
                                 ["What went wrong", "bonus token"]),
    "drafts past the budget": ({"speculative_decode": PAST_THE_BUDGET}, ("properties",),
                               ["never draft past the budget"]),
}
