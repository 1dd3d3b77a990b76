"""The server's routes, one module per concern, each an `APIRouter` over one
`ServingContext`: generation (completions, chat), models, probes (health, version,
metrics), tokenization (tokenize, detokenize, tokenizer_info) and administration
(server_info, reset_prefix_cache). app.py puts them together behind the middleware.
"""
