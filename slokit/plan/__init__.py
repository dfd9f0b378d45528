"""Roofline capacity planning for latency SLOs."""
