"""Model transforms in numpy: merging (`merge`), magnitude pruning (`prune`), low-rank
factorization (`lowrank`), over tensors seen through a `view.ModelView`."""
