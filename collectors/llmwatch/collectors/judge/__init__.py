"""The live model judge: sampled pointwise verdicts on captured calls, off the proxy's process."""
