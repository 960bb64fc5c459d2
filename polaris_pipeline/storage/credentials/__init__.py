"""Credentials vended for one task's locations, as Polaris vends them: S3, Azure, GCS."""
