package model

import "strings"

// stripeCurrencies are the currencies Stripe accepts for payments
// (presentment currencies, https://docs.stripe.com/currencies), in the
// lowercase ISO 4217 form its API uses. A subscription's currency must be
// one of them: "xyz" is refused at create, not at its first charge.
var stripeCurrencies = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range strings.Fields(`
		usd aed afn all amd ang aoa ars aud awg azn bam bbd bdt bgn bhd bif bmd bnd bob brl bsd bwp byn bzd
		cad cdf chf clp cny cop crc cve czk djf dkk dop dzd egp etb eur fjd fkp gbp gel gip gmd gnf gtq gyd
		hkd hnl htg huf idr ils inr isk jmd jod jpy kes kgs khr kmf krw kwd kyd kzt lak lbp lkr lrd lsl mad
		mdl mga mkd mmk mnt mop mur mvr mwk mxn myr mzn nad ngn nio nok npr nzd omr pab pen pgk php pkr pln
		pyg qar ron rsd rub rwf sar sbd scr sek sgd shp sle sos srd std szl thb tjs tnd top try ttd twd tzs
		uah ugx uyu uzs vnd vuv wst xaf xcd xof xpf yer zar zmw`) {
		m[c] = true
	}
	return m
}()

// SupportedCurrency reports whether c is one of Stripe's supported
// currencies, exactly as its API writes it (lowercase: "USD" is not).
func SupportedCurrency(c string) bool { return stripeCurrencies[c] }
