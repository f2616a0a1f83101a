"""Exec credential provider plugins (pkg/credentialprovider/plugin upstream):
--image-credential-provider-config and --image-credential-provider-bin-dir."""
