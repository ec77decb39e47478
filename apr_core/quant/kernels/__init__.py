"""numpy kernels; importing this package registers every one of them in the registry."""
