// Byte sizes: the one place the binary units are written. Config keys ending in `_gb` are GiB.
export const KiB = 1024;
export const MiB = 1024 * KiB;
export const GiB = 1024 * MiB;
