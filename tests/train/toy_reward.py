"""A reward a random character-level policy can earn sometimes (so advantages are non-zero)."""


def digit_reward(prompt, completion, **row):
    return float(sum(c.isdigit() for c in completion) >= 1)
