package org.apache.polaris.core.admin.model;

/**
 * A stand-in (our code) for one class of polaris-api-management-model, a module generated from
 * Polaris's management API spec that the registry serves at no version. From 1.4 on, polaris-core's
 * FeatureConfiguration names three of this enum's constants in a default value while it
 * initializes, and loadTasks reads POLARIS_TASK_TIMEOUT_MILLIS through FeatureConfiguration: without
 * the class, the release's own loadTasks cannot run. It holds the constant names of the spec's
 * storageType enum and nothing else; any other use of the model fails loudly (NoSuchMethodError).
 */
public final class StorageConfigInfo {
  private StorageConfigInfo() {}

  /** The storage types of the spec's StorageConfigInfo.storageType. */
  public enum StorageTypeEnum {
    S3,
    GCS,
    AZURE,
    FILE
  }
}
