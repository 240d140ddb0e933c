"""Release-specific adapters. Each module declares ``RELEASES`` (a PEP 440
specifier of the torch releases it serves) and ``FEATURES`` (stable-API features
it provides); :mod:`spyre_shims._torch.select` picks one per feature by feature
detection, with ``RELEASES`` as the documented range and tiebreak."""
