"""Broken submissions to 07_engine_bugs: each must lose the points of the named cells, and only those."""

ENGINE_A_UNFIXED = '''def fixed_engine_a(target_probs, draft_probs, draft_tokens, generator=None):
    return engine_a_verify(target_probs, draft_probs, draft_tokens, generator)
'''

ENGINE_A_BY_THE_LIBRARY = '''from specbook.verify import verify_chain


def fixed_engine_a(target_probs, draft_probs, draft_tokens, generator=None):
    tokens, n = verify_chain(target_probs[None], draft_probs[None], draft_tokens[None], generator)
    return tokens[0, : n[0]]
'''

ENGINE_PARTS_SWAPPED = '''WRONG_PART_A = "the token after a rejection"
WRONG_PART_B = "the acceptance test"
KEEP_A = 0.5
FIRST_TOKEN_1_A = 0.3
AFTER_REJECTION_B = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'unfixed': ({"fixed_engine_a": ENGINE_A_UNFIXED}, ("fix_law",), ["What went wrong", "counts a draft twice"]),
    'by the library': ({"fixed_engine_a": ENGINE_A_BY_THE_LIBRARY}, ("fix_law",), ["write it yourself"]),
    'parts swapped': ({"diagnosis": ENGINE_PARTS_SWAPPED}, ("diagnosis_a_tests", "diagnosis_b_tests"), ["compare how often engine A keeps a draft", "engine B keeps drafts exactly"]),
}
