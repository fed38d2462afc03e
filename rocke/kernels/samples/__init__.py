"""Small sample kernels written in rocke.dsl: a vector add and a row softmax."""
