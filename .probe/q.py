import sys; sys.path.insert(0, "../src")
import numpy as np, cupy
from cupy.cuda import cufft
def tryit(name, f):
    try:
        f(); print(name, "ok", flush=True)
    except Exception as e:
        print(name, "FAIL", type(e).__name__, e, flush=True)
n, bins, fields = 20, 11, 824
mk = lambda: cufft.PlanNd([n], [n], 1, n, [bins], 1, bins, cufft.CUFFT_D2Z, fields, "C", -1, None)
x = cupy.random.random((fields, n))
tryit("after random", mk)
from gridcomm.comm import Communicator
c = Communicator()
tryit("after Communicator", mk)
from gridcomm.lab.apps.spectral import fourier
from gridcomm.lab.bench.spectral import fft_bytes
tryit("after imports", mk)
s = cupy.cuda.Stream(non_blocking=True)
tryit("after stream", mk)
