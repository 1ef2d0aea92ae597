#!/bin/bash
# The cuda_test cases that need the bert fixture or the demo decoder.
source .devpack/setup.sh
mkdir -p $OUT
cd /tmp
timeout 200 cuda_test --gtest_filter='CudaEngineBuildTest.EncoderEngineOnTheGpu:CudaKvSizingTest.*:CudaEncoderFixtureTest.*:CudaDemoModelTest.*:CudaPrefixCacheTest.*' > $OUT/cuda_test_rest.txt 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |tests? ran|^\[  FAILED|^\[       OK" $OUT/cuda_test_rest.txt | head -20
