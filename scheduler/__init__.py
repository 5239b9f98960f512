"""Scheduler: fenced leases in Redis, wake jobs on RQ, the reconciler. (Later issue.)"""
