"""Broken submissions to 02_chain_verifier: each must lose the points of the named cells, and only those."""

GREEDY_BONUS = '''def verify_row(target_probs, draft_probs, draft_tokens, generator=None):
    out = []
    for j, x in enumerate(draft_tokens.tolist()):
        if torch.rand((), generator=generator) * draft_probs[j, x] < target_probs[j, x]:
            out.append(x)
            continue
        out.append(int(torch.multinomial(residual(target_probs[j], draft_probs[j]), 1, generator=generator)))
        return torch.tensor(out)
    out.append(int(target_probs[-1].argmax()))
    return torch.tensor(out)
'''

BY_THE_LIBRARY = '''def verify_row(target_probs, draft_probs, draft_tokens, generator=None):
    from specbook.verify import verify_chain
    tokens, n = verify_chain(target_probs[None], draft_probs[None], draft_tokens[None], generator)
    return tokens[0, : int(n[0])]
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'greedy bonus': ({"verify_row": GREEDY_BONUS}, ("verify_law",), ["What went wrong", "bonus token", "last row"]),
    "by the library": ({"verify_row": BY_THE_LIBRARY}, ("verify_properties", "verify_law"), ["write it yourself"]),
}
