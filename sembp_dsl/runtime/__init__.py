"""Running a graph: the forward pass over one input (`forward`), data sets, and evaluation over many."""
