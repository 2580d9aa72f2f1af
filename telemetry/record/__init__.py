"""Recording and reduction: trackers, compact on-device state, the masked-moment
kernel, the coalesced DP reduction and the export of every state source."""
