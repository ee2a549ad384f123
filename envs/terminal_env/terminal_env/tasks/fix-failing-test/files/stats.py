def mean(values):
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / (len(values) - 1)


def spread(values):
    return max(values) - min(values)
