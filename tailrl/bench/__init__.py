"""`tailrl bench ...`: side-by-side benchmarks that report ratios measured in one run."""
