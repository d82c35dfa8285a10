"""The lab built on the library: the dwarfs that prove it (``apps``), the measurement helpers (``measure``), the
benchmarks (``bench``), the one-command report (``report``) and the ``gridcomm`` command line (``cli``).

Each layer imports only the library and the layers listed before it (tests/test_structure.py keeps it so)."""
