"""Broken submissions to 05_find_the_bug: each must lose the points of the named cells, and only those."""

UNFIXED = '''def speculative_token(target_logits, draft_logits, draft_token, temperature, generator=None):
    return given_speculative_token(target_logits, draft_logits, draft_token, temperature, generator)
'''

TEMPERATURE_DROPPED = '''def speculative_token(target_logits, draft_logits, draft_token, temperature, generator=None):
    return given_speculative_token(target_logits, draft_logits, draft_token, 1.0, generator)
'''

WRONG_DIAGNOSIS = '''EXACT_AT_TEMPERATURE = 0.0
p_t = sampling_probs(example_target_logits, example_temperature)
drawn = sampling_probs(example_draft_logits, example_temperature)
keep = torch.clamp(p_t / drawn, max=1)  # the rule as it should be, not as the given code runs it
KEEP_1 = float(keep[1])
EMIT_0 = float(p_t[0])
'''

BY_THE_LIBRARY = '''def speculative_token(target_logits, draft_logits, draft_token, temperature, generator=None):
    from specbook.verify import verify_token
    p, q = sampling_probs(target_logits, temperature), sampling_probs(draft_logits, temperature)
    return int(verify_token(p, q, draft_token, generator))
'''

# label -> (answers: grade_id -> code, cells that must lose all their points, words the feedback must show)
BROKEN = {
    'unfixed': ({"speculative_token": UNFIXED}, ("fix_properties", "fix_law"), ["same logits on both sides"]),
    'temperature dropped': ({"speculative_token": TEMPERATURE_DROPPED}, ("fix_law",), ["What went wrong", "Hint"]),
    'wrong diagnosis': ({"diagnosis": WRONG_DIAGNOSIS}, ("diagnosis_tests",), ["EXACT_AT_TEMPERATURE = 0.0"]),
    'fix by the library': ({"speculative_token": BY_THE_LIBRARY}, ("fix_properties", "fix_law"), ["write it yourself"]),
}
