import numpy as np, cupy, traceback
from cupy.cuda import cufft
print(cupy.__version__, cufft.getVersion())
def tryit(name, f):
    try:
        f(); print(name, "ok")
    except Exception as e:
        print(name, "FAIL", type(e).__name__, e)
n, bins, fields = 20, 11, 824
tryit("plain", lambda: cufft.PlanNd([n], [n], 1, n, [bins], 1, bins, cufft.CUFFT_D2Z, fields, "C", -1, None))
tryit("np ints", lambda: cufft.PlanNd([np.int64(n)], [np.int64(n)], 1, np.int64(n), [np.int64(bins)], 1, np.int64(bins), cufft.CUFFT_D2Z, np.int64(fields), "C", -1, None))
tryit("rfft", lambda: cupy.fft.rfft(cupy.random.random((fields, n))))
tryit("plain after", lambda: cufft.PlanNd([n], [n], 1, n, [bins], 1, bins, cufft.CUFFT_D2Z, fields, "C", -1, None))
tryit("Z2D", lambda: cufft.PlanNd([n], [bins], 1, bins, [n], 1, n, cufft.CUFFT_Z2D, fields, "C", -1, None))
tryit("n=24", lambda: cufft.PlanNd([24], [24], 1, 24, [13], 1, 13, cufft.CUFFT_D2Z, fields, "C", -1, None))
