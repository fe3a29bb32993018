"""How much to draft: pass costs, acceptance tracking, k=auto, the load cap and start-up calibration."""
