"""Registry credentials for image pulls (pkg/credentialprovider upstream)."""
