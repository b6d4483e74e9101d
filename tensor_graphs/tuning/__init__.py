"""Choosing among a graph's kernel paths by measurement: the timing database (`database`)."""
