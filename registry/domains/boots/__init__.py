"""The boots domain (serving workers report boot outcomes; endpoints only)."""
