"""Code generated from proto/snowmint/v1/snowmint.proto by clients/python/gen.py. DO NOT EDIT."""
