"""The paged KV cache: the pool's size, the block tables over it, prefix caching and the
compiled cache object the model's functions read and write."""
