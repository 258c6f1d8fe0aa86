"""Diagnosis internals: context, advice (the ladder's judgement), finding kinds, Xid table."""
