"""NemoGuard JailbreakDetect: ``jailbreak detection model`` on a classifier endpoint."""
