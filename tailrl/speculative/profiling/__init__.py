"""Offline profiles for speculation: the draft ladder, the TGS model's costs, keyed acceptance."""
