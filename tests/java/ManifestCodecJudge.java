import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

import org.apache.iceberg.GenericManifestFile;
import org.apache.iceberg.GenericPartitionFieldSummary;
import org.apache.iceberg.ManifestFile;
import org.apache.iceberg.ManifestFile.PartitionFieldSummary;
import org.apache.iceberg.ManifestFiles;
import org.apache.iceberg.avro.AvroSchemaUtil;
import org.apache.iceberg.shaded.com.fasterxml.jackson.core.json.JsonWriteFeature;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.json.JsonMapper;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.iceberg.types.Types;

/**
 * Iceberg's own ManifestFiles.encode/decode, driven line by line so one JVM judges many cases.
 *
 * <p>Each input line is a request, answered by exactly one JSON line:
 *
 * <ul>
 *   <li>{@code decode BASE64}: ManifestFiles.decode of the bytes; the answer's "manifest" holds
 *       every field as the ManifestFile getters return it (the values Polaris's cleanup handler
 *       sees).
 *   <li>{@code encode JSON}: builds a GenericManifestFile the way Iceberg's Avro readers do (the
 *       public Avro-schema constructor, then put(position, value) for each field, so Iceberg's own
 *       defaults apply to absent values) and answers ManifestFiles.encode of it as "base64".
 * </ul>
 *
 * <p>Field names are the Iceberg spec's (manifest_path, added_snapshot_id, ...); bytes travel as
 * base64. Output escapes every non-ASCII character, so each UTF-16 unit of a Java string
 * reaches the reader exactly. A failure answers {"ok": false, "error": "Class: message"}.
 */
public final class ManifestCodecJudge {
  private static final ObjectMapper JSON =
      JsonMapper.builder().enable(JsonWriteFeature.ESCAPE_NON_ASCII).build();
  private static final Types.StructType MANIFEST_TYPE = ManifestFile.schema().asStruct();
  private static final Types.StructType SUMMARY_TYPE = PartitionFieldSummary.getType();
  private static final org.apache.iceberg.shaded.org.apache.avro.Schema MANIFEST_AVRO =
      AvroSchemaUtil.convert(ManifestFile.schema(), "manifest_file");
  private static final org.apache.iceberg.shaded.org.apache.avro.Schema SUMMARY_AVRO =
      AvroSchemaUtil.convert(SUMMARY_TYPE, "r508");

  private ManifestCodecJudge() {}

  public static void main(String[] args) throws Exception {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.US_ASCII);
    String line;
    while ((line = in.readLine()) != null) {
      ObjectNode answer;
      try {
        answer = answer(line);
      } catch (Exception | LinkageError e) {
        // Every failure, including a class Iceberg's jar could not link, is an answer, so one
        // bad case never ends the JVM that judges the others.
        answer = JSON.createObjectNode();
        answer.put("ok", false);
        answer.put("error", e.getClass().getName() + ": " + e.getMessage());
      }
      out.println(JSON.writeValueAsString(answer));
      out.flush();
    }
  }

  private static ObjectNode answer(String line) throws Exception {
    int space = line.indexOf(' ');
    String verb = space < 0 ? line : line.substring(0, space);
    String argument = space < 0 ? "" : line.substring(space + 1);
    ObjectNode answer = JSON.createObjectNode();
    switch (verb) {
      case "decode":
        ManifestFile decoded = ManifestFiles.decode(Base64.getDecoder().decode(argument));
        answer.put("ok", true);
        answer.set("manifest", describe(decoded));
        return answer;
      case "encode":
        byte[] encoded = ManifestFiles.encode(build(JSON.readTree(argument)));
        answer.put("ok", true);
        answer.put("base64", Base64.getEncoder().encodeToString(encoded));
        return answer;
      default:
        throw new IllegalArgumentException("unknown request " + verb);
    }
  }

  private static ObjectNode describe(ManifestFile m) {
    ObjectNode o = JSON.createObjectNode();
    o.put("manifest_path", m.path());
    o.put("manifest_length", m.length());
    o.put("partition_spec_id", m.partitionSpecId());
    o.put("content", m.content() == null ? null : m.content().id());
    o.put("sequence_number", m.sequenceNumber());
    o.put("min_sequence_number", m.minSequenceNumber());
    o.put("added_snapshot_id", m.snapshotId());
    o.put("added_files_count", m.addedFilesCount());
    o.put("existing_files_count", m.existingFilesCount());
    o.put("deleted_files_count", m.deletedFilesCount());
    o.put("added_rows_count", m.addedRowsCount());
    o.put("existing_rows_count", m.existingRowsCount());
    o.put("deleted_rows_count", m.deletedRowsCount());
    if (m.partitions() == null) {
      o.putNull("partitions");
    } else {
      ArrayNode partitions = o.putArray("partitions");
      for (PartitionFieldSummary s : m.partitions()) {
        ObjectNode p = partitions.addObject();
        p.put("contains_null", s.containsNull());
        p.put("contains_nan", s.containsNaN());
        p.put("lower_bound", base64(s.lowerBound()));
        p.put("upper_bound", base64(s.upperBound()));
      }
    }
    o.put("key_metadata", base64(m.keyMetadata()));
    o.put("first_row_id", m.firstRowId());
    return o;
  }

  private static String base64(ByteBuffer buffer) {
    if (buffer == null) {
      return null;
    }
    ByteBuffer copy = buffer.duplicate();
    byte[] bytes = new byte[copy.remaining()];
    copy.get(bytes);
    return Base64.getEncoder().encodeToString(bytes);
  }

  private static GenericManifestFile build(JsonNode description) {
    GenericManifestFile m = new GenericManifestFile(MANIFEST_AVRO);
    Iterator<Map.Entry<String, JsonNode>> fields = description.fields();
    while (fields.hasNext()) {
      Map.Entry<String, JsonNode> field = fields.next();
      Types.NestedField column = MANIFEST_TYPE.field(field.getKey());
      if (column == null) {
        throw new IllegalArgumentException("no manifest field " + field.getKey());
      }
      m.put(position(MANIFEST_TYPE, column.fieldId()), value(column, field.getValue()));
    }
    return m;
  }

  private static int position(Types.StructType struct, int fieldId) {
    List<Types.NestedField> columns = struct.fields();
    for (int i = 0; i < columns.size(); i++) {
      if (columns.get(i).fieldId() == fieldId) {
        return i;
      }
    }
    throw new IllegalArgumentException("no field id " + fieldId);
  }

  /** The Avro datum value Iceberg's readers would hand to put() for this field. */
  private static Object value(Types.NestedField column, JsonNode node) {
    if (node == null || node.isNull()) {
      return null;
    }
    switch (column.type().typeId()) {
      case STRING:
        return node.textValue();
      case BOOLEAN:
        return node.booleanValue();
      case INTEGER:
        if (!node.canConvertToInt()) {
          throw new IllegalArgumentException(column.name() + " is not an int: " + node);
        }
        return node.intValue();
      case LONG:
        if (!node.canConvertToLong()) {
          throw new IllegalArgumentException(column.name() + " is not a long: " + node);
        }
        return node.longValue();
      case BINARY:
        return ByteBuffer.wrap(Base64.getDecoder().decode(node.textValue()));
      case LIST:
        List<PartitionFieldSummary> summaries = new ArrayList<>();
        for (JsonNode element : node) {
          summaries.add(summary(element));
        }
        return summaries;
      default:
        throw new IllegalArgumentException("unexpected type of " + column.name());
    }
  }

  private static PartitionFieldSummary summary(JsonNode description) {
    GenericPartitionFieldSummary s = new GenericPartitionFieldSummary(SUMMARY_AVRO);
    Iterator<Map.Entry<String, JsonNode>> fields = description.fields();
    while (fields.hasNext()) {
      Map.Entry<String, JsonNode> field = fields.next();
      Types.NestedField column = SUMMARY_TYPE.field(field.getKey());
      if (column == null) {
        throw new IllegalArgumentException("no partition summary field " + field.getKey());
      }
      s.put(position(SUMMARY_TYPE, column.fieldId()), value(column, field.getValue()));
    }
    return s;
  }
}
