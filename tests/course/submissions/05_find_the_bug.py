"""Broken submissions to 05_find_the_bug: each must lose the points of the named cells, and only those."""

UNFIXED = '''def speculative_token(target_logits, draft_logits, draft_token, temperature, generator=None):
    return given_speculative_token(target_logits, draft_logits, draft_token, temperature, generator)
'''

TEMPERATURE_DROPPED = '''def speculative_token(target_logits, draft_logits, draft_token, temperature, generator=None):
    return given_speculative_token(target_logits, draft_logits, draft_token, 1.0, generator)
'''

WRONG_DIAGNOSIS = '''EXACT_AT_TEMPERATURE = 0.0
BUGGY_Q = sampling_probs(example_draft_logits, example_temperature)
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'unfixed': ({"speculative_token": UNFIXED}, ("fix_properties", "fix_law"), ["same logits on both sides"]),
    'temperature dropped': ({"speculative_token": TEMPERATURE_DROPPED}, ("fix_law",), ["What went wrong", "Hint"]),
    'wrong diagnosis': ({"diagnosis": WRONG_DIAGNOSIS}, ("diagnosis_tests",), ["EXACT_AT_TEMPERATURE = 0.0"]),
}
