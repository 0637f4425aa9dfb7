// Anchor translation unit for the CAF precompiled header.
