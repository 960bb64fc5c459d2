package org.apache.polaris.core.admin.model;

/**
 * A stand-in (our code) for one class of polaris-api-management-model, which the registry serves
 * at no version: FeatureConfiguration (1.4 and later) names constants of this enum in a default
 * value while it initializes (see StorageConfigInfo.java here). Constant names only.
 */
public final class AuthenticationParameters {
  private AuthenticationParameters() {}

  /** The authentication types of the spec's AuthenticationParameters.authenticationType. */
  public enum AuthenticationTypeEnum {
    OAUTH,
    BEARER,
    SIGV4,
    GCP,
    IMPLICIT
  }
}
