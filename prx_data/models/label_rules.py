"""The label rules, one text shared by the text-only classifier's prompt
(:mod:`prx_data.models.labeling.prompt`) and the fused caption-and-label prompt
(:mod:`prx_data.models.captioning.prompt`): kept below both so captioning never imports labeling."""

LABEL_RULES = """\
nsfw: the image shows nudity, sexual activity or sexually explicit content, or graphic \
violence, gore or dead bodies.
text: the image is mainly text or a document: a page, a scanned document, a receipt or form, a \
screenshot of a website or app, a presentation slide, a spreadsheet or table, a chart or \
diagram made of labels, or a poster, flyer or meme dominated by words.
visual: everything else: photographs, paintings, illustrations and renders of people, animals, \
places, objects and scenes, including ones with some text in them (a logo, a shop sign, a \
product label, a watermark).

If nsfw applies, answer nsfw even when text applies too."""
