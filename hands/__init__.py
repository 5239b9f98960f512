"""Hands executors: run tools in sandboxes keyed by operation id. (Later issue.)"""
