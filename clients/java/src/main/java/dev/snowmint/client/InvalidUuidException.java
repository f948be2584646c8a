package dev.snowmint.client;

/**
 * A string that is not a UUID's text form ({@link Uuids#parseUuid(String)}), or a UUID that
 * snowmint could not have minted with a layout ({@link Layout#decodeUuid(java.util.UUID)});
 * {@link #kind()} says why, as the shared test vectors name it.
 */
public final class InvalidUuidException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    /** Why; {@link #label()} is the name the shared test vectors use. */
    public enum Kind {
        /** Not 36 characters of hex digits in groups of 8-4-4-4-12. */
        TEXT,
        /** Its version (bits 79 to 76) is not 7. */
        VERSION,
        /** Its variant (bits 63 and 62) is not {@code 0b10}, RFC 9562's. */
        VARIANT,
        /** Its slot or sequence does not fit the layout's worker or sequence field. */
        FIELDS,
        /** Its time is not the start of one of the layout's ticks: before the epoch, between two ticks, or past the last. */
        TICK;

        /** The kind in lower case, as the vectors and the other clients name it: {@code version}, and so on. */
        public String label() {
            return name().toLowerCase(java.util.Locale.ROOT);
        }
    }

    private final Kind kind;

    InvalidUuidException(Kind kind, String message) {
        super(message);
        this.kind = kind;
    }

    /** Why. */
    public Kind kind() {
        return kind;
    }
}
